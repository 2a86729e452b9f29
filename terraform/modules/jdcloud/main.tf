locals {
  # JD Cloud's GPU type names carry no fixed GPU table here: var.gpu names it for the contract.
  gpu = var.gpu

  # Device names after the system disk (vda).
  data_devices = ["vdb", "vdc", "vdd", "vde", "vdf", "vdg", "vdh"]
}

resource "jdcloud_vpc" "this" {
  vpc_name    = var.name_prefix
  cidr_block  = var.vpc_cidr
  description = "private-llm ${var.name_prefix}"
}

resource "jdcloud_subnet" "this" {
  vpc_id      = jdcloud_vpc.this.id
  subnet_name = var.name_prefix
  cidr_block  = var.subnet_cidr
  description = "private-llm ${var.name_prefix}"
}

resource "jdcloud_network_security_group" "this" {
  network_security_group_name = "${var.name_prefix}-hosts"
  vpc_id                      = jdcloud_vpc.this.id
  description                 = "SSH and gateway from allowed CIDRs only"
}

# direction 0 = inbound, 1 = outbound; protocol 6 = TCP, 300 = all (provider documentation).
resource "jdcloud_network_security_group_rules" "this" {
  security_group_id = jdcloud_network_security_group.this.id

  dynamic "security_group_rules" {
    for_each = flatten([for cidr in var.allowed_cidrs : [
      { cidr = cidr, port = var.ssh_port, what = "ssh" },
      { cidr = cidr, port = var.gateway_port, what = "gateway" },
    ]])
    content {
      address_prefix = security_group_rules.value.cidr
      direction      = 0
      protocol       = 6
      from_port      = security_group_rules.value.port
      to_port        = security_group_rules.value.port
      description    = "${security_group_rules.value.what} from ${security_group_rules.value.cidr}"
    }
  }

  # No group-to-group rules in this provider: the deployment's hosts reach each other through
  # the VPC range, and reach nothing outside it (they install from the bundle).
  security_group_rules {
    address_prefix = var.vpc_cidr
    direction      = 0
    protocol       = 300
    description    = "deployment hosts to each other"
  }

  security_group_rules {
    address_prefix = var.vpc_cidr
    direction      = 1
    protocol       = 300
    description    = "inside the VPC only"
  }
}

resource "jdcloud_key_pairs" "this" {
  key_name   = var.name_prefix
  public_key = var.ssh_public_key
}

resource "jdcloud_instance" "this" {
  count              = var.instance_count
  az                 = var.zone
  instance_name      = "${var.name_prefix}-${count.index + 1}"
  instance_type      = var.instance_type
  image_id           = var.image_id
  subnet_id          = jdcloud_subnet.this.id
  key_names          = jdcloud_key_pairs.this.key_name
  security_group_ids = [jdcloud_network_security_group.this.id]
  description        = "private-llm ${var.name_prefix}"

  system_disk {
    disk_category = "cloud"
    device_name   = "vda"
    disk_type     = var.system_disk.type
    disk_size_gb  = var.system_disk.size_gb
    az            = var.zone
    disk_name     = "${var.name_prefix}-${count.index + 1}-system"
    auto_delete   = true
  }

  dynamic "data_disk" {
    for_each = var.data_disks
    content {
      disk_category = "cloud"
      device_name   = local.data_devices[data_disk.key]
      disk_type     = data_disk.value.type
      disk_size_gb  = data_disk.value.size_gb
      az            = var.zone
      disk_name     = "${var.name_prefix}-${count.index + 1}-data${data_disk.key + 1}"
      auto_delete   = true
    }
  }
}

resource "jdcloud_eip" "this" {
  count          = var.public_ip ? var.instance_count : 0
  eip_provider   = var.eip_provider
  bandwidth_mbps = var.eip_bandwidth_mbps
}

resource "jdcloud_eip_association" "this" {
  count         = var.public_ip ? var.instance_count : 0
  instance_id   = jdcloud_instance.this[count.index].id
  elastic_ip_id = jdcloud_eip.this[count.index].id
}
