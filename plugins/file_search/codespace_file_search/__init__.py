"""CodeSpace file search: find_files (follows Codex 0.171.0's codex-file-search) and grep."""
