variable "name_prefix" {
  description = "Deployment name; every resource and host name starts with it."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$", var.name_prefix))
    error_message = "name_prefix must be 1-40 lowercase letters, digits or '-' (it becomes host names)."
  }
}

variable "zone" {
  description = "Availability zone for every instance and disk, e.g. cn-north-1a."
  type        = string

  validation {
    condition     = can(regex("^cn-[a-z]+-[0-9][a-z]$", var.zone))
    error_message = "zone must look like cn-north-1a (region followed by a letter)."
  }
}

variable "instance_type" {
  description = "JD Cloud instance type, three dot-separated parts such as g.n2.xlarge; set var.gpu for GPU types."
  type        = string

  validation {
    condition     = can(regex("^[a-z]+\\.[a-z0-9]+\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like g.n2.xlarge (class.generation.size)."
  }
}

variable "instance_count" {
  description = "How many identical instances to create."
  type        = number
  default     = 1

  validation {
    condition     = var.instance_count >= 1 && var.instance_count <= 64 && floor(var.instance_count) == var.instance_count
    error_message = "instance_count must be a whole number from 1 to 64."
  }
}

variable "image_id" {
  description = "Image to boot (Debian 12 or Ubuntu 22.04+), an img-... id or an image UUID."
  type        = string

  validation {
    condition     = can(regex("^(img-[a-z0-9]+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$", var.image_id))
    error_message = "image_id must be an img-... id or an image UUID."
  }
}

variable "ssh_user" {
  description = "User the installer logs in as (the image's default user, e.g. ubuntu or admin)."
  type        = string
  default     = "root"
}

variable "ssh_public_key" {
  description = "OpenSSH public key line installed for ssh_user."
  type        = string

  validation {
    condition     = can(regex("^(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+", var.ssh_public_key))
    error_message = "ssh_public_key must be one OpenSSH public key line (ssh-ed25519 AAAA... or ssh-rsa AAAA...)."
  }
}

variable "system_disk" {
  description = "System disk (a cloud disk): size in GiB and type (ssd or premium-hdd)."
  type = object({
    size_gb = number
    type    = optional(string, "ssd")
  })
  default = { size_gb = 100 }

  validation {
    condition     = var.system_disk.size_gb >= 20 && var.system_disk.size_gb <= 500 && contains(["ssd", "premium-hdd"], var.system_disk.type)
    error_message = "system_disk must be 20-500 GiB of type ssd or premium-hdd."
  }
}

variable "data_disks" {
  description = "Extra cloud data disks per instance, deleted with the instance."
  type = list(object({
    size_gb = number
    type    = optional(string, "ssd")
  }))
  default = []

  validation {
    condition     = length(var.data_disks) <= 7 && alltrue([for d in var.data_disks : d.size_gb >= 20 && d.size_gb <= 3000 && contains(["ssd", "premium-hdd"], d.type)])
    error_message = "Up to 7 data_disks, each 20-3000 GiB of type ssd or premium-hdd."
  }
}

variable "vpc_cidr" {
  description = "CIDR of the VPC created for the deployment."
  type        = string
  default     = "10.80.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0))
    error_message = "vpc_cidr must be a CIDR block such as 10.80.0.0/16."
  }
}

variable "subnet_cidr" {
  description = "CIDR of the subnet (inside vpc_cidr) the instances live in."
  type        = string
  default     = "10.80.1.0/24"

  validation {
    condition     = can(cidrhost(var.subnet_cidr, 0))
    error_message = "subnet_cidr must be a CIDR block such as 10.80.1.0/24."
  }
}

variable "allowed_cidrs" {
  description = "Sources allowed to reach SSH and the gateway port; nothing else is opened."
  type        = list(string)

  validation {
    condition     = length(var.allowed_cidrs) > 0 && alltrue([for c in var.allowed_cidrs : can(cidrhost(c, 0))])
    error_message = "allowed_cidrs must list at least one CIDR block, e.g. [\"203.0.113.0/24\"]."
  }

  validation {
    condition     = var.allow_ssh_from_anywhere || !anytrue([for c in var.allowed_cidrs : endswith(c, "/0")])
    error_message = "allowed_cidrs opens SSH to the whole internet (/0); list your own ranges, or set allow_ssh_from_anywhere = true to accept that."
  }
}

variable "allow_ssh_from_anywhere" {
  description = "Explicit override that accepts a /0 entry in allowed_cidrs."
  type        = bool
  default     = false
}

variable "ssh_port" {
  description = "SSH port opened to allowed_cidrs."
  type        = number
  default     = 22

  validation {
    condition     = var.ssh_port >= 1 && var.ssh_port <= 65535
    error_message = "ssh_port must be 1-65535."
  }
}

variable "gateway_port" {
  description = "Public port of the gateway (OpenAI-compatible API) opened to allowed_cidrs."
  type        = number
  default     = 8080

  validation {
    condition     = var.gateway_port >= 1 && var.gateway_port <= 65535 && var.gateway_port != var.ssh_port
    error_message = "gateway_port must be 1-65535 and differ from ssh_port."
  }
}

variable "public_ip" {
  description = "Give every instance a public address (else reach them over the private one, e.g. through a VPN)."
  type        = bool
  default     = true
}

variable "gpu" {
  description = "GPU model and count per instance, reported in the host contract (this module has no GPU table)."
  type = object({
    type  = string
    count = number
  })
  default = null
}

variable "eip_bandwidth_mbps" {
  description = "Bandwidth of each host's elastic IP in Mbps when public_ip is true."
  type        = number
  default     = 10

  validation {
    condition     = var.eip_bandwidth_mbps >= 1 && var.eip_bandwidth_mbps <= 200
    error_message = "eip_bandwidth_mbps must be 1-200."
  }
}

variable "eip_provider" {
  description = "Elastic IP line: bgp everywhere, no_bgp only in cn-south-1 and cn-east-1."
  type        = string
  default     = "bgp"

  validation {
    condition     = contains(["bgp", "no_bgp"], var.eip_provider)
    error_message = "eip_provider must be bgp or no_bgp."
  }
}
