# Two g5.12xlarge hosts (4 x A10G each) reachable on SSH and the gateway from one office range.
# Credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ~/.aws/credentials, never in here.
provider "aws" {
  region = "us-east-1"
}

module "hosts" {
  source = "../../modules/aws"

  name_prefix    = "llm-prod"
  zone           = "us-east-1a"
  instance_type  = "g5.12xlarge"
  instance_count = 2
  image_id       = "ami-0123456789abcdef0" # a Debian 12 or Ubuntu 22.04 AMI in your region
  ssh_user       = "ubuntu"
  ssh_public_key = file("~/.ssh/id_ed25519.pub")
  system_disk    = { size_gb = 300 }
  allowed_cidrs  = ["203.0.113.0/24"]
}

output "hosts" {
  description = "Hosts in the installer's contract."
  value       = module.hosts.hosts
}
