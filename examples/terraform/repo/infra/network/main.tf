# A stand-in for a VPC: terraform_data is built into Terraform (>= 1.4) and
# OpenTofu, so this example plans and applies without a cloud account.
terraform {
  backend "local" {}
}

variable "cidr" {
  type        = string
  description = "The network's address range, per stage in <stage>.tfvars"
}

resource "terraform_data" "vpc" {
  input = {
    cidr = var.cidr
    name = "vpc-${terraform.workspace}"
  }
}

output "vpc_id" {
  value = terraform_data.vpc.id
}

output "cidr" {
  value = var.cidr
}
