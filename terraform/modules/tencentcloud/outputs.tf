output "contract_version" {
  description = "Version of the host contract below; the installer refuses versions it does not know."
  value       = 1
}

output "hosts" {
  description = "Hosts in the shared contract: name, public_address, private_address, ssh_user, gpu_type, gpu_count."
  value = [for inst in tencentcloud_instance.this : {
    name            = try(inst.instance_name, null)
    public_address  = try(inst.public_ip != "" ? inst.public_ip : null, null)
    private_address = try(inst.private_ip, null)
    ssh_user        = var.ssh_user
    gpu_type        = try(local.gpu.type, null)
    gpu_count       = try(local.gpu.count, null)
  }]
}

output "security_group_id" {
  description = "Security group of the hosts (SSH and gateway from allowed_cidrs only)."
  value       = try(tencentcloud_security_group.this.id, null)
}
