"""requirements.txt is the whole environment: `make setup` installs it with --no-deps, so a package that a pinned
package needs and that is not pinned would simply be missing on a newcomer's machine. Checked against what each
installed package declares it needs (its metadata), the extras other pinned packages ask of it included."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.specifiers import SpecifierSet

from coursekit.layout import REPO_ROOT

# Needed by a pinned package, and left out of the environment on purpose (requirements.txt says why).
LEFT_OUT = {"rfc3987-syntax": "jsonschema's check of the 'iri' format: importing it costs 1.4 s of CPU per process"}


def pinned(name: str) -> dict[str, str]:
    """{canonical name: version} of a requirements file's `name==version` lines."""
    pins = {}
    for line in (REPO_ROOT / name).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            package, version = line.split("==")
            pins[canonicalize_name(package)] = version
    return pins


def needs(package: str, extras: set[str]) -> list[Requirement]:
    """What the installed `package` declares it needs, with the given extras, on this platform."""
    found = []
    for text in distribution(package).requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or any(requirement.marker.evaluate({"extra": extra}) for extra in {"", *extras}):
            found.append(requirement)
    return found


def test_every_package_a_pinned_package_needs_is_pinned_at_a_version_it_accepts():
    pins = pinned("requirements.txt")
    # Wanted for the files they carry, without their own dependencies (see requirements-nodeps.txt).
    no_deps = set(pinned("requirements-nodeps.txt"))
    extras: dict[str, set[str]] = {}
    for package in pins:
        for requirement in needs(package, set()):
            extras.setdefault(canonicalize_name(requirement.name), set()).update(requirement.extras)
    problems = []
    for package, version in pins.items():
        try:
            installed = distribution(package).version
        except PackageNotFoundError:
            problems.append(f"{package}=={version} is pinned but not installed: run make setup")
            continue
        if not SpecifierSet(f"=={version}").contains(installed, prereleases=True):     # 2.13.0+cpu is 2.13.0
            problems.append(f"{package} is {installed} here, pinned at {version}: run make setup")
        for requirement in needs(package, extras.get(package, set())):
            name = canonicalize_name(requirement.name)
            if name in LEFT_OUT or name in no_deps:
                continue
            if name not in pins:
                problems.append(f"{package} needs {requirement}, which requirements.txt does not pin")
            elif not requirement.specifier.contains(pins[name], prereleases=True):
                problems.append(f"{package} needs {requirement}; requirements.txt pins {name}=={pins[name]}")
    assert not problems, "\n".join(problems)


def test_what_is_left_out_is_not_pinned():
    pins = pinned("requirements.txt")
    assert not set(LEFT_OUT) & set(pins), f"pinned, though left out on purpose: {set(LEFT_OUT) & set(pins)}"
