# One GPU host in cn-north-1 reached over its private address (through your VPN).
# Credentials: export access_key/secret_key (the provider's names); the installer also maps
# JDCLOUD_ACCESS_KEY/JDCLOUD_SECRET_KEY to them.
terraform {
  required_providers {
    jdcloud = {
      source = "hashicorp/jdcloud"
    }
  }
}

provider "jdcloud" {
  region = "cn-north-1"
}

module "hosts" {
  source = "../../modules/jdcloud"

  name_prefix    = "llm-bj"
  zone           = "cn-north-1a"
  instance_type  = "p.n1v100.2xlarge" # check the GPU types your account is offered
  image_id       = "img-m5s0tb1jgo"
  ssh_public_key = file("~/.ssh/id_ed25519.pub")
  public_ip      = false
  allowed_cidrs  = ["10.0.0.0/8"]
  gpu            = { type = "NVIDIA V100", count = 1 }
}

output "hosts" {
  description = "Hosts in the installer's contract."
  value       = module.hosts.hosts
}
