"""The terraform and provider mirror a verified bundle carries (written by
terraform.mirror.add_to_bundle), for `installer up|plan --bundle`."""

from installer.bundle.build import OpenedBundle
from installer.terraform.mirror import BUNDLE_DIR, TerraformTools


def from_bundle(bundle: OpenedBundle | None) -> TerraformTools | None:
    """Terraform from a bundle that build.open_bundle verified (signature, then every byte); None
    without a bundle or if it carries none. Only such a bundle is accepted: its manifest alone is
    no proof, since whoever changed a file could have changed the manifest too."""
    if bundle is None or not any(f.path.startswith(BUNDLE_DIR + "/") for f in bundle.manifest.files):
        return None
    root = bundle.root / BUNDLE_DIR
    # The signed digests go with the paths: the folder is checked again before every run
    # (terraform.mirror.check_signed), also by `installer down` long after this verification.
    prefix = BUNDLE_DIR + "/"
    signed = {f.path.removeprefix(prefix): f.sha256 for f in bundle.manifest.files if f.path.startswith(prefix)}
    return TerraformTools(str(root / "bin" / "terraform"), root / "plugins", root, signed)
