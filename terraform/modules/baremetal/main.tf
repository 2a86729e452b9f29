# Bare metal creates nothing: the hosts exist already. The module only reshapes them into the
# host contract every provider module outputs, so the installer reads all providers one way.
locals {
  hosts = [for h in var.hosts : {
    name            = h.name
    public_address  = h.address
    private_address = coalesce(h.private_address, h.address)
    ssh_user        = coalesce(h.ssh_user, var.ssh_user)
    gpu_type        = h.gpu_type
    gpu_count       = h.gpu_count
  }]
}
