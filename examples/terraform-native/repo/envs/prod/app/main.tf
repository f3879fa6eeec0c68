terraform {
  backend "local" {}
}

variable "vpc_id" {
  type        = string
  description = "network.vpc_id: wavegate passes it (wavegate.toml, [[terraform.root]] inputs)"
}

module "app" {
  source        = "../../../modules/app"
  name          = "app-prod"
  vpc_id        = var.vpc_id
  instance_type = "m5.large"
}

output "hostname" {
  value = module.app.hostname
}
