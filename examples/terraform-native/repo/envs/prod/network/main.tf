terraform {
  backend "local" {}
}

module "network" {
  source = "../../../modules/network"
  name   = "vpc-prod"
  cidr   = "10.2.0.0/16"
}

output "vpc_id" {
  value = module.network.vpc_id
}

output "cidr" {
  value = module.network.cidr
}
