locals {
  family = split(".", var.instance_type)[0]
  size   = split(".", var.instance_type)[1]

  # NVIDIA GPU per instance family (AWS accelerated-computing instance pages).
  gpu_models = {
    g5   = "NVIDIA A10G"
    g6   = "NVIDIA L4"
    g6e  = "NVIDIA L40S"
    p4d  = "NVIDIA A100 40GB"
    p4de = "NVIDIA A100 80GB"
    p5   = "NVIDIA H100"
    p5e  = "NVIDIA H200"
    p5en = "NVIDIA H200"
  }
  # p-families come only as 8-GPU sizes; g-families have 1 GPU up to 16xlarge, 4 at 12/24xlarge, 8 at 48xlarge.
  gpu_count_by_size = { "12xlarge" = 4, "24xlarge" = 4, "48xlarge" = 8 }
  known_gpu = contains(keys(local.gpu_models), local.family) ? {
    type  = local.gpu_models[local.family]
    count = startswith(local.family, "p") ? 8 : lookup(local.gpu_count_by_size, local.size, 1)
  } : null
  gpu = var.gpu != null ? var.gpu : local.known_gpu

  # Ingress: exactly SSH and the gateway port, from each allowed CIDR.
  ingress = flatten([for cidr in var.allowed_cidrs : [
    { cidr = cidr, port = var.ssh_port, what = "ssh" },
    { cidr = cidr, port = var.gateway_port, what = "gateway" },
  ]])

  tags = merge(var.tags, { "private-llm/deployment" = var.name_prefix })

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

resource "aws_vpc" "this" {
  cidr_block           = var.vpc_cidr
  enable_dns_hostnames = true
  tags                 = merge(local.tags, { Name = var.name_prefix })
}

resource "aws_subnet" "this" {
  vpc_id                  = aws_vpc.this.id
  cidr_block              = var.subnet_cidr
  availability_zone       = var.zone
  map_public_ip_on_launch = var.public_ip
  tags                    = merge(local.tags, { Name = var.name_prefix })
}

# A route to the internet gateway only exists so the public addresses answer; the security
# group below still admits nothing but SSH and the gateway port from allowed_cidrs.
resource "aws_internet_gateway" "this" {
  count  = var.public_ip ? 1 : 0
  vpc_id = aws_vpc.this.id
  tags   = merge(local.tags, { Name = var.name_prefix })
}

resource "aws_route_table" "this" {
  count  = var.public_ip ? 1 : 0
  vpc_id = aws_vpc.this.id
  tags   = merge(local.tags, { Name = var.name_prefix })

  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.this[0].id
  }
}

resource "aws_route_table_association" "this" {
  count          = var.public_ip ? 1 : 0
  subnet_id      = aws_subnet.this.id
  route_table_id = aws_route_table.this[0].id
}

resource "aws_security_group" "this" {
  name        = "${var.name_prefix}-hosts"
  description = "private-llm ${var.name_prefix}: SSH and gateway from allowed CIDRs only"
  vpc_id      = aws_vpc.this.id
  tags        = merge(local.tags, { Name = "${var.name_prefix}-hosts" })

  dynamic "ingress" {
    for_each = local.ingress
    content {
      description = "${ingress.value.what} from ${ingress.value.cidr}"
      protocol    = "tcp"
      from_port   = ingress.value.port
      to_port     = ingress.value.port
      cidr_blocks = [ingress.value.cidr]
    }
  }

  # Multi-node engines (Ray, NCCL) talk between the deployment's own hosts only.
  ingress {
    description = "deployment hosts to each other"
    protocol    = "-1"
    from_port   = 0
    to_port     = 0
    self        = true
  }

  # Hosts install from the bundle and need nothing outside the VPC.
  egress {
    description = "inside the VPC only"
    protocol    = "-1"
    from_port   = 0
    to_port     = 0
    cidr_blocks = [var.vpc_cidr]
  }
}

resource "aws_key_pair" "this" {
  key_name   = var.name_prefix
  public_key = var.ssh_public_key
  tags       = local.tags
}

resource "aws_instance" "this" {
  count                       = var.instance_count
  ami                         = var.image_id
  instance_type               = var.instance_type
  subnet_id                   = aws_subnet.this.id
  vpc_security_group_ids      = [aws_security_group.this.id]
  key_name                    = aws_key_pair.this.key_name
  associate_public_ip_address = var.public_ip
  user_data                   = local.user_data
  tags                        = merge(local.tags, { Name = "${var.name_prefix}-${count.index + 1}" })

  root_block_device {
    volume_size = var.system_disk.size_gb
    volume_type = var.system_disk.type
  }

  dynamic "ebs_block_device" {
    for_each = var.data_disks
    content {
      # /dev/sdf.. are the names AWS documents for attached EBS data volumes.
      device_name           = "/dev/sd${substr("fghijklmno", ebs_block_device.key, 1)}"
      volume_size           = ebs_block_device.value.size_gb
      volume_type           = ebs_block_device.value.type
      delete_on_termination = true
    }
  }

  metadata_options {
    http_tokens = "required" # IMDSv2 only
  }
}
