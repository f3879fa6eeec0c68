variable "name" {
  type = string
}

variable "cidr" {
  type = string
}

resource "terraform_data" "vpc" {
  input = {
    name = var.name
    cidr = var.cidr
  }
}

output "vpc_id" {
  value = terraform_data.vpc.id
}

output "cidr" {
  value = var.cidr
}
