locals {
  family = split(".", var.instance_type)[0]

  # NVIDIA GPU per CVM family (Tencent Cloud GPU instance documentation).
  gpu_models = {
    GN7    = "NVIDIA T4"
    GN10Xp = "NVIDIA V100"
    GT4    = "NVIDIA A100"
    PNV4   = "NVIDIA A10"
  }
  # GPUs per size for the sizes this module was written against; other sizes: set var.gpu.
  gpu_counts = {
    "GN7.2XLARGE32"    = 1
    "GN7.5XLARGE80"    = 1
    "GN7.10XLARGE160"  = 2
    "GN7.20XLARGE320"  = 4
    "GT4.4XLARGE96"    = 1
    "GT4.8XLARGE192"   = 2
    "GT4.20XLARGE474"  = 4
    "GT4.41XLARGE948"  = 8
    "PNV4.7XLARGE116"  = 1
    "PNV4.14XLARGE232" = 2
    "PNV4.28XLARGE466" = 4
    "PNV4.56XLARGE932" = 8
  }
  known_gpu = contains(keys(local.gpu_models), local.family) ? {
    type  = local.gpu_models[local.family]
    count = lookup(local.gpu_counts, var.instance_type, null)
  } : null
  gpu = var.gpu != null ? var.gpu : local.known_gpu

  tags = merge(var.tags, { "private-llm-deployment" = var.name_prefix })

  # cloud-init installs the host key the installer already trusts (see var.ssh_host_key).
  user_data = var.ssh_host_key == null ? null : join("\n", ["#cloud-config", yamlencode({
    ssh_deletekeys  = true
    ssh_genkeytypes = []
    ssh_keys = {
      ed25519_private = var.ssh_host_key.private
      ed25519_public  = var.ssh_host_key.public
    }
  })])
}

resource "tencentcloud_vpc" "this" {
  name       = var.name_prefix
  cidr_block = var.vpc_cidr
  tags       = local.tags
}

resource "tencentcloud_subnet" "this" {
  vpc_id            = tencentcloud_vpc.this.id
  name              = var.name_prefix
  cidr_block        = var.subnet_cidr
  availability_zone = var.zone
  tags              = local.tags
}

resource "tencentcloud_security_group" "this" {
  name        = "${var.name_prefix}-hosts"
  description = "private-llm ${var.name_prefix}: SSH and gateway from allowed CIDRs only"
  tags        = local.tags
}

# One rule set owns every rule of the group (the provider requires that), in priority order.
resource "tencentcloud_security_group_rule_set" "this" {
  security_group_id = tencentcloud_security_group.this.id

  dynamic "ingress" {
    for_each = var.allowed_cidrs
    content {
      action      = "ACCEPT"
      cidr_block  = ingress.value
      protocol    = "TCP"
      port        = tostring(var.ssh_port)
      description = "ssh from ${ingress.value}"
    }
  }

  dynamic "ingress" {
    for_each = var.allowed_cidrs
    content {
      action      = "ACCEPT"
      cidr_block  = ingress.value
      protocol    = "TCP"
      port        = tostring(var.gateway_port)
      description = "gateway from ${ingress.value}"
    }
  }

  # Multi-node engines (Ray, NCCL) talk between the deployment's own hosts only.
  ingress {
    action             = "ACCEPT"
    source_security_id = tencentcloud_security_group.this.id
    protocol           = "ALL"
    port               = "ALL"
    description        = "deployment hosts to each other"
  }

  ingress {
    action      = "DROP"
    cidr_block  = "0.0.0.0/0"
    protocol    = "ALL"
    port        = "ALL"
    description = "nothing else"
  }

  # Hosts install from the bundle and need nothing outside the VPC.
  egress {
    action      = "ACCEPT"
    cidr_block  = var.vpc_cidr
    protocol    = "ALL"
    port        = "ALL"
    description = "inside the VPC only"
  }

  egress {
    action      = "DROP"
    cidr_block  = "0.0.0.0/0"
    protocol    = "ALL"
    port        = "ALL"
    description = "nothing else"
  }
}

resource "tencentcloud_key_pair" "this" {
  # Key pair names allow letters, digits and '_' only, at most 25 characters.
  key_name   = substr(replace(var.name_prefix, "-", "_"), 0, 25)
  public_key = var.ssh_public_key
}

resource "tencentcloud_instance" "this" {
  count                      = var.instance_count
  instance_name              = "${var.name_prefix}-${count.index + 1}"
  hostname                   = "${var.name_prefix}-${count.index + 1}"
  availability_zone          = var.zone
  image_id                   = var.image_id
  instance_type              = var.instance_type
  instance_charge_type       = var.instance_charge_type
  project_id                 = var.project_id
  vpc_id                     = tencentcloud_vpc.this.id
  subnet_id                  = tencentcloud_subnet.this.id
  orderly_security_groups    = [tencentcloud_security_group.this.id]
  key_ids                    = [tencentcloud_key_pair.this.id]
  allocate_public_ip         = var.public_ip
  internet_max_bandwidth_out = var.public_ip ? var.internet_max_bandwidth_out : null
  system_disk_type           = var.system_disk.type
  system_disk_size           = var.system_disk.size_gb
  user_data_raw              = local.user_data
  tags                       = local.tags

  dynamic "data_disks" {
    for_each = var.data_disks
    content {
      data_disk_type       = data_disks.value.type
      data_disk_size       = data_disks.value.size_gb
      delete_with_instance = true
    }
  }
}
