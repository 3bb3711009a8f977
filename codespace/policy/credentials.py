"""Credential stores hidden from every workspace by the default policy.

Each entry is a path under the server user's home (``~``) where a commonly used
tool keeps secrets: tokens, passwords, keys, cookies, or a history of commands
typed with secrets in them; or one of the system's own secrets, which only root can
read (a server running as root would otherwise hand them out as plain files). They
become ``none`` entries of ``filesystem.paths`` (an operator's own entry for the same
key wins), so neither the file tools nor a sandboxed command can read them. The README's policy section lists them; a test
keeps the two in step.

An entry that does not exist costs nothing per command: the engines skip
missing paths, and the file tools' rule lookup is by path prefix, not by entry.
"""

CREDENTIAL_GROUPS: dict[str, tuple[str, ...]] = {
    "SSH, GnuPG, netrc": (
        "~/.ssh", "~/.gnupg", "~/.netrc", "~/.authinfo", "~/.authinfo.gpg",
    ),
    "VCS hosts": (
        "~/.git-credentials", "~/.config/git/credentials", "~/.config/gh", "~/.config/glab-cli",
        "~/.config/hub", "~/.config/tea", "~/.config/jj", "~/.subversion/auth",
    ),
    "package registries": (
        "~/.npmrc", "~/.yarnrc", "~/.yarnrc.yml", "~/.pypirc", "~/.config/pypoetry/auth.toml",
        "~/.cargo/credentials", "~/.cargo/credentials.toml", "~/.gem/credentials",
        "~/.local/share/gem/credentials", "~/.m2/settings.xml", "~/.m2/settings-security.xml",
        "~/.gradle/gradle.properties", "~/.nuget/NuGet/NuGet.Config", "~/.config/NuGet/NuGet.Config",
        "~/.composer/auth.json", "~/.config/composer/auth.json", "~/.config/dart/pub-credentials.json",
        "~/.pub-cache/credentials.json", "~/.config/jfrog", "~/.bundle/config",
    ),
    "cloud CLIs and infrastructure tools": (
        "~/.aws", "~/.config/gcloud", "~/.azure", "~/.oci", "~/.aliyun", "~/.config/doctl",
        "~/.config/linode-cli", "~/.config/hcloud", "~/.kube", "~/.terraform.d/credentials.tfrc.json",
        "~/.terraformrc", "~/.vault-token", "~/.s3cfg", "~/.boto", "~/.config/rclone",
        "~/.databrickscfg", "~/.snowflake", "~/.fly", "~/.config/configstore", "~/.config/netlify",
        "~/.wrangler", "~/.config/.wrangler", "~/.local/share/com.vercel.cli", "~/.config/heroku",
        "~/.config/sops", "~/.config/age",
    ),
    "container registries": (
        "~/.docker", "~/.config/containers/auth.json", "~/.config/helm/registry",
    ),
    "databases": (
        "~/.pgpass", "~/.my.cnf", "~/.mylogin.cnf",
    ),
    "agent CLIs": (
        "~/.codex", "~/.claude", "~/.claude.json", "~/.gemini", "~/.config/github-copilot",
        "~/.aider.conf.yml", "~/.cursor", "~/.continue", "~/.config/openai", "~/.config/anthropic",
    ),
    "password managers and keyrings": (
        "~/.password-store", "~/.config/op", "~/.op", "~/.config/Bitwarden CLI", "~/.local/share/keyrings",
        "~/.local/share/kwalletd", "~/.pki", "~/.config/keepassxc", "~/.local/share/gopass",
    ),
    "browser profiles and mail": (
        "~/.mozilla", "~/.config/google-chrome", "~/.config/chromium", "~/.config/BraveSoftware",
        "~/.config/microsoft-edge", "~/.config/vivaldi", "~/.config/opera", "~/snap/firefox",
        "~/snap/chromium", "~/.thunderbird",
    ),
    "shell and REPL histories": (
        "~/.bash_history", "~/.zsh_history", "~/.zhistory", "~/.histfile", "~/.sh_history",
        "~/.local/share/fish/fish_history", "~/.local/share/atuin", "~/.python_history",
        "~/.node_repl_history", "~/.psql_history", "~/.mysql_history", "~/.sqlite_history",
        "~/.rediscli_history", "~/.irb_history", "~/.pry_history", "~/.dbshell", "~/.mongosh",
        "~/.ipython/profile_default/history.sqlite", "~/.lesshst", "~/.viminfo", "~/.wget-hsts",
    ),
    "system secrets (readable by root)": (
        "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/security/opasswd",
        "/etc/ssh/ssh_host_rsa_key", "/etc/ssh/ssh_host_ecdsa_key", "/etc/ssh/ssh_host_ed25519_key",
        "/etc/ssh/ssh_host_dsa_key", "/etc/krb5.keytab",
    ),
}

CREDENTIAL_PATHS: tuple[str, ...] = tuple(path for group in CREDENTIAL_GROUPS.values() for path in group)
