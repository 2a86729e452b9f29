# One PNV4.7XLARGE116 (1 x A10) in Guangzhou, billed by the hour.
# Credentials: TENCENTCLOUD_SECRET_ID/TENCENTCLOUD_SECRET_KEY or ~/.tccli/default.credential.
terraform {
  required_providers {
    tencentcloud = {
      source = "tencentcloudstack/tencentcloud"
    }
  }
}

provider "tencentcloud" {
  region = "ap-guangzhou"
}

module "hosts" {
  source = "../../modules/tencentcloud"

  name_prefix    = "llm-gz"
  zone           = "ap-guangzhou-6"
  instance_type  = "PNV4.7XLARGE116"
  image_id       = "img-487zeit5" # a Debian 12 or Ubuntu 22.04 image in the region
  ssh_user       = "ubuntu"
  ssh_public_key = file("~/.ssh/id_ed25519.pub")
  data_disks     = [{ size_gb = 500, type = "CLOUD_SSD" }]
  allowed_cidrs  = ["203.0.113.0/24"]
}

output "hosts" {
  description = "Hosts in the installer's contract."
  value       = module.hosts.hosts
}
