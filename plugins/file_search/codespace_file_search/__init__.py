"""CodeSpace file search: find_files (follows Codex 0.171.0's codex-file-search) and grep."""

# Upstream's fuzzyFileSearch answers at most this many files. Here, not in ranking: the tool's
# definition needs it, and a server without a kept tool listing builds the listing from the
# definitions while its client waits, without loading the matcher.
LIMIT = 50
