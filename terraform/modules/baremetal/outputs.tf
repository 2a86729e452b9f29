output "contract_version" {
  description = "Version of the host contract below; the installer refuses versions it does not know."
  value       = 1
}

output "hosts" {
  description = "Hosts in the shared contract: name, public_address, private_address, ssh_user, gpu_type, gpu_count."
  value       = try(local.hosts, [])
}
