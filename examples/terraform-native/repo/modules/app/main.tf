variable "name" {
  type = string
}

variable "vpc_id" {
  type = string
}

variable "instance_type" {
  type = string
}

resource "terraform_data" "server" {
  input = {
    vpc_id        = var.vpc_id
    instance_type = var.instance_type
  }
}

output "hostname" {
  value = "${var.name}.example.com"
}
