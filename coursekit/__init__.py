"""Course tooling: regenerate attnlab/ and exercises/ from solutions/, and export a student's own attnlab."""
