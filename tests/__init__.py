"""The course's tests (make test). Helper modules here (submissions, cheats, hostile_cases, grading) build the
submissions the grading tests and `make bench` grade."""
