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
    return TerraformTools(str(root / "bin" / "terraform"), root / "plugins")
