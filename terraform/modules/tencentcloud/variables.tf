variable "name_prefix" {
  description = "Deployment name; every resource and host name starts with it."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$", var.name_prefix))
    error_message = "name_prefix must be 1-40 lowercase letters, digits or '-' (it becomes host names)."
  }
}

variable "zone" {
  description = "Availability zone for the subnet and every instance, e.g. ap-guangzhou-6."
  type        = string

  validation {
    condition     = can(regex("^[a-z]{2}-[a-z]+(-fsi)?-[0-9]+$", var.zone))
    error_message = "zone must look like ap-guangzhou-6 (region, '-', zone number)."
  }
}

variable "instance_type" {
  description = "CVM instance type, e.g. GN7.2XLARGE32 (T4), PNV4.7XLARGE116 (A10), GT4.41XLARGE948 (A100)."
  type        = string

  validation {
    condition     = can(regex("^[A-Z][A-Za-z0-9]*\\.[0-9]*[A-Z]+[0-9]*$", var.instance_type))
    error_message = "instance_type must look like GN7.2XLARGE32 (family, dot, size)."
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
  description = "CVM image to boot (a Debian 12 or Ubuntu 22.04+ image with cloud-init), e.g. img-487zeit5."
  type        = string

  validation {
    condition     = can(regex("^img-[a-z0-9]{8}$", var.image_id))
    error_message = "image_id must be a CVM image id such as img-487zeit5."
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

variable "ssh_host_key" {
  description = "Host key pair the installer pinned in its known_hosts; cloud-init installs it so the first SSH connection is verified, not trusted blindly. Null keeps the image's own keys."
  type = object({
    private = string
    public  = string
  })
  default   = null
  sensitive = true
}

variable "system_disk" {
  description = "System disk: size in GiB and CBS type (CLOUD_PREMIUM, CLOUD_SSD, CLOUD_BSSD, CLOUD_HSSD)."
  type = object({
    size_gb = number
    type    = optional(string, "CLOUD_PREMIUM")
  })
  default = { size_gb = 100 }

  validation {
    condition     = var.system_disk.size_gb >= 50 && var.system_disk.size_gb <= 1024
    error_message = "system_disk.size_gb must be 50-1024 GiB (the CVM limits)."
  }
}

variable "data_disks" {
  description = "Extra CBS data disks per instance, deleted with the instance."
  type = list(object({
    size_gb = number
    type    = optional(string, "CLOUD_PREMIUM")
  }))
  default = []

  validation {
    condition     = length(var.data_disks) <= 20 && alltrue([for d in var.data_disks : d.size_gb >= 10 && d.size_gb <= 32000])
    error_message = "Up to 20 data_disks, each 10-32000 GiB."
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
  description = "GPU model and count per instance, for instance types the module's table does not know."
  type = object({
    type  = string
    count = number
  })
  default = null
}

variable "tags" {
  description = "Extra tags on every resource."
  type        = map(string)
  default     = {}
}

variable "instance_charge_type" {
  description = "Billing of the instances. PREPAID is refused: a prepaid CVM cannot be destroyed before it expires, so `installer down` could not remove it."
  type        = string
  default     = "POSTPAID_BY_HOUR"

  validation {
    condition     = contains(["POSTPAID_BY_HOUR", "SPOTPAID"], var.instance_charge_type)
    error_message = "instance_charge_type must be POSTPAID_BY_HOUR or SPOTPAID."
  }
}

variable "internet_max_bandwidth_out" {
  description = "Public bandwidth cap in Mbps when public_ip is true."
  type        = number
  default     = 10

  validation {
    condition     = var.internet_max_bandwidth_out >= 1 && var.internet_max_bandwidth_out <= 1000
    error_message = "internet_max_bandwidth_out must be 1-1000 Mbps."
  }
}

variable "project_id" {
  description = "Tencent Cloud project the instances belong to (0 is the default project)."
  type        = number
  default     = 0
}
