terraform {
  backend "local" {}
}

variable "vpc_id" {
  type        = string
  description = "network.vpc_id: wavegate passes it (wavegate.toml, [[terraform.root]] inputs)"
}

module "app" {
  source        = "../../../modules/app"
  name          = "app-dev"
  vpc_id        = var.vpc_id
  instance_type = "t3.small"
}

output "hostname" {
  value = module.app.hostname
}
