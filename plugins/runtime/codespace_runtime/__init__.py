"""CodeSpace's hardened worker and its Unix-socket protocol 5 (follows Codex 0.171.0's
codex-process-hardening and codex-uds)."""
