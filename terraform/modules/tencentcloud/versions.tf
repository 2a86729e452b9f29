terraform {
  # 1.9 is the first release whose variable validations may refer to other variables.
  required_version = ">= 1.9"

  required_providers {
    tencentcloud = {
      # The provider Tencent Cloud maintains (github.com/tencentcloudstack/terraform-provider-tencentcloud).
      source  = "tencentcloudstack/tencentcloud"
      version = ">= 1.81.0, < 2.0.0"
    }
  }
}
