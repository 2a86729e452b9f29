variable "hosts" {
  description = "Machines that already exist, as the inventory lists them. Nothing is created for them."
  type = list(object({
    name            = string
    address         = string
    private_address = optional(string)
    ssh_user        = optional(string)
    gpu_type        = optional(string)
    gpu_count       = optional(number)
  }))

  validation {
    condition     = length(var.hosts) > 0
    error_message = "List at least one host: bare metal has nothing to create, only hosts to pass through."
  }

  validation {
    condition     = length(distinct([for h in var.hosts : h.name])) == length(var.hosts)
    error_message = "Every host needs its own name; two entries in var.hosts share one."
  }

  validation {
    condition     = alltrue([for h in var.hosts : can(regex("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", h.name))])
    error_message = "Host names must be DNS labels (lowercase letters, digits and '-'), because they become host and file names."
  }
}

variable "ssh_user" {
  description = "SSH user for hosts that do not name their own."
  type        = string
  default     = "root"
}
