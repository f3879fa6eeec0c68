terraform {
  backend "local" {}
}

module "network" {
  source = "../../../modules/network"
  name   = "vpc-dev"
  cidr   = "10.1.0.0/16"
}

output "vpc_id" {
  value = module.network.vpc_id
}

output "cidr" {
  value = module.network.cidr
}
