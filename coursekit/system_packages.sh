#!/usr/bin/env bash
# The Debian packages the course needs besides Python, installed when missing. Every `make` target runs
# this first, so a fresh machine needs nothing but the README's commands.
#   chromium            the browser tests drive it (Playwright uses the system browser, it downloads none)
#   bubblewrap          the grading sandbox (bwrap)
#   fonts-wqy-microhei  Chinese glyphs in the book's figures (without it they are empty boxes)
# Without root it installs nothing: it prints the command to run and fails, before any other step.
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
has_cjk_font() {
    if command -v fc-list >/dev/null 2>&1; then
        fc-list : family 2>/dev/null | grep -qi "wenquanyi"
    else
        compgen -G "/usr/share/fonts/truetype/wqy/wqy-microhei*" >/dev/null
    fi
}
has_cjk_font || missing+=(fonts-wqy-microhei)

[ ${#missing[@]} -eq 0 ] && exit 0

install="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if ! command -v apt-get >/dev/null 2>&1; then
    echo "Missing system packages: ${missing[*]} (Debian names). This is not a Debian or Ubuntu system:" >&2
    echo "install their equivalents with your package manager, then run make again." >&2
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "Missing system packages: ${missing[*]}. Install them as root, then run make again:" >&2
    echo "" >&2
    echo "    sudo sh -c '$install'" >&2
    echo "" >&2
    exit 1
fi
echo "Installing the system packages the course needs: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "Installed: ${missing[*]}"
