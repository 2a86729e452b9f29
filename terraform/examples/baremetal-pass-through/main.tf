# Machines that exist: nothing is created, the hosts come out in the same contract as clouds.
module "hosts" {
  source = "../../modules/baremetal"

  ssh_user = "root"
  hosts = [
    { name = "gpu-1", address = "192.0.2.10", gpu_type = "NVIDIA H200", gpu_count = 8 },
    { name = "gpu-2", address = "192.0.2.11", gpu_type = "NVIDIA H200", gpu_count = 8 },
  ]
}

output "hosts" {
  description = "Hosts in the installer's contract."
  value       = module.hosts.hosts
}
