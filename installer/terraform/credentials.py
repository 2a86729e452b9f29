"""Find cloud credentials before Terraform makes any API call, without ever reading or writing them.

We only look at which environment variables are set and which credential files exist; the
values stay in the environment of the terraform process (or in the provider's own files).
"""

from collections.abc import Mapping
from pathlib import Path

from installer.terraform.errors import CredentialsError


def _pair(env: Mapping[str, str], key_id: str, secret: str) -> bool:
    """True if both are set; an error if only one is (a half-set pair is always a mistake)."""
    have = [name for name in (key_id, secret) if env.get(name)]
    if len(have) == 1:
        missing = secret if have == [key_id] else key_id
        raise CredentialsError(f"{have[0]} is set but {missing} is not; export both, or neither")
    return len(have) == 2


def _aws(env: Mapping[str, str], home: Path) -> dict[str, str]:
    if _pair(env, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        return {}
    files = [
        Path(env.get("AWS_SHARED_CREDENTIALS_FILE", home / ".aws" / "credentials")),
        Path(env.get("AWS_CONFIG_FILE", home / ".aws" / "config")),
    ]
    roles = env.get("AWS_WEB_IDENTITY_TOKEN_FILE") and env.get("AWS_ROLE_ARN")
    container = env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") or env.get(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI"
    )
    if any(f.is_file() for f in files) or roles or container:
        return {}
    raise CredentialsError(
        "no AWS credentials found",
        [
            "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            "or AWS_PROFILE with ~/.aws/credentials (`aws configure` writes it)",
            "or web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN) or container credentials",
            "the installer never stores credentials; Terraform reads them from there",
        ],
    )


def _tencentcloud(env: Mapping[str, str], home: Path) -> dict[str, str]:
    if _pair(env, "TENCENTCLOUD_SECRET_ID", "TENCENTCLOUD_SECRET_KEY"):
        return {}
    # The provider's shared credentials: <dir>/<profile>.credential, as tccli writes them.
    folder = Path(env.get("TENCENTCLOUD_SHARED_CREDENTIALS_DIR", home / ".tccli"))
    profile = env.get("TENCENTCLOUD_PROFILE", "default")
    if (folder / f"{profile}.credential").is_file():
        return {}
    raise CredentialsError(
        "no Tencent Cloud credentials found",
        [
            "export TENCENTCLOUD_SECRET_ID and TENCENTCLOUD_SECRET_KEY",
            f"or write them with `tccli configure` ({folder / (profile + '.credential')})",
            "the installer never stores credentials; Terraform reads them from there",
        ],
    )


def _jdcloud(env: Mapping[str, str], home: Path) -> dict[str, str]:
    # hashicorp/jdcloud 1.1.0 reads the lower-case variables access_key/secret_key. We also
    # accept the conventional JDCLOUD_* names and hand them over in terraform's environment only.
    if _pair(env, "access_key", "secret_key"):
        return {}
    if _pair(env, "JDCLOUD_ACCESS_KEY", "JDCLOUD_SECRET_KEY"):
        return {"access_key": env["JDCLOUD_ACCESS_KEY"], "secret_key": env["JDCLOUD_SECRET_KEY"]}
    raise CredentialsError(
        "no JD Cloud credentials found",
        [
            "export JDCLOUD_ACCESS_KEY and JDCLOUD_SECRET_KEY (the provider's own names,",
            "access_key and secret_key, work too)",
            "the installer never stores credentials; Terraform reads them from the environment",
        ],
    )


_CHECKS = {"aws": _aws, "tencentcloud": _tencentcloud, "jdcloud": _jdcloud}


def check(provider: str, env: Mapping[str, str], home: Path | None = None) -> dict[str, str]:
    """CredentialsError when `provider` has no credentials; else env additions for terraform."""
    return _CHECKS[provider](env, home or Path.home())
