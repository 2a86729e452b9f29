"""The `cloud:` section: what a cloud provider's Terraform module takes, with each cloud's own
regions and name formats, checked before any API call."""

import re
from ipaddress import ip_network
from typing import Annotated, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from installer.inventory.fields import LocalPath, Strict, matching


class Disk(Strict):
    size_gb: Annotated[int, Field(ge=1, le=65536)]
    type: str | None = None  # the provider's disk type name; None: the module's default


class GPU(Strict):
    """GPU model and count per instance, for instance types the provider module does not know."""

    type: str
    count: Annotated[int, Field(ge=0, le=64)]


class _Cloud(Strict):
    """What every cloud provider module takes; each subclass sets the formats its cloud uses.

    Checked here, before any API call: a region the cloud does not have, a malformed instance
    type or image id, and SSH opened to the whole internet without the explicit override.
    """

    REGIONS: ClassVar[frozenset[str]]
    ZONE: ClassVar[str]  # regex; {region} is replaced by the region
    INSTANCE_TYPE: ClassVar[str]
    IMAGE: ClassVar[str]
    EXAMPLES: ClassVar[dict[str, str]]

    region: str
    zone: str
    instance_type: str
    image: str
    count: Annotated[int, Field(ge=1, le=64)] = 1
    system_disk: Disk = Disk(size_gb=100)
    data_disks: Annotated[list[Disk], Field(max_length=7)] = Field(default_factory=list)
    # Declared before allowed_cidrs so that validator can see it.
    allow_ssh_from_anywhere: bool = False
    allowed_cidrs: Annotated[list[str], Field(min_length=1)]
    ssh_public_key: LocalPath = Field(description="OpenSSH public key file installed on the hosts")
    public_ip: bool = True
    vpc_cidr: str = "10.80.0.0/16"
    subnet_cidr: str = "10.80.1.0/24"
    gpu: GPU | None = None

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if value not in cls.REGIONS:
            known = ", ".join(sorted(cls.REGIONS))
            raise ValueError(f"unknown region {value!r}; use one of: {known}")
        return value

    @field_validator("zone")
    @classmethod
    def _zone(cls, value: str, info: ValidationInfo) -> str:
        region = info.data.get("region")
        if region and not re.fullmatch(cls.ZONE.format(region=re.escape(region)), value):
            example = cls.EXAMPLES["zone"]
            raise ValueError(f"zone {value!r} is not in {region} (expected like {example!r})")
        return value

    @field_validator("instance_type", "image")
    @classmethod
    def _shape(cls, value: str, info: ValidationInfo) -> str:
        field = str(info.field_name)
        pattern = cls.INSTANCE_TYPE if field == "instance_type" else cls.IMAGE
        if not re.fullmatch(pattern, value):
            example = cls.EXAMPLES[field]
            raise ValueError(f"malformed {field} {value!r} (expected like {example!r})")
        return value

    @field_validator("allowed_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for cidr in value:
            try:
                net = ip_network(cidr)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not a CIDR block ({exc})") from None
            if net.prefixlen == 0 and not info.data.get("allow_ssh_from_anywhere"):
                raise ValueError(
                    f"{cidr} opens SSH to the whole internet; list your own ranges, or set "
                    "cloud.allow_ssh_from_anywhere: true to accept that"
                )
        return value

    @field_validator("vpc_cidr", "subnet_cidr")
    @classmethod
    def _network(cls, value: str) -> str:
        try:
            ip_network(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a CIDR block ({exc})") from None
        return value

    @model_validator(mode="after")
    def _subnet_in_vpc(self) -> "_Cloud":
        subnet, vpc = ip_network(self.subnet_cidr), ip_network(self.vpc_cidr)
        if subnet.version != vpc.version or not subnet.subnet_of(vpc):  # type: ignore[arg-type]
            raise ValueError(f"subnet_cidr {subnet} is not inside vpc_cidr {vpc}")
        return self


class AWSCloud(_Cloud):
    REGIONS = frozenset({
        "us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1", "ca-west-1",
        "sa-east-1", "mx-central-1", "eu-central-1", "eu-central-2", "eu-west-1", "eu-west-2",
        "eu-west-3", "eu-south-1", "eu-south-2", "eu-north-1", "il-central-1", "me-south-1",
        "me-central-1", "af-south-1", "ap-east-1", "ap-south-1", "ap-south-2", "ap-northeast-1",
        "ap-northeast-2", "ap-northeast-3", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3",
        "ap-southeast-4", "ap-southeast-5", "ap-southeast-7", "cn-north-1", "cn-northwest-1",
        "us-gov-east-1", "us-gov-west-1",
    })
    ZONE = r"{region}[a-z]"
    INSTANCE_TYPE = (
        r"[a-z][a-z0-9-]*\.(nano|micro|small|medium|large|[0-9]*xlarge|metal(-[0-9]+xl)?)"
    )
    IMAGE = r"ami-[0-9a-f]{8,17}"
    EXAMPLES: ClassVar[dict[str, str]] = {
        "zone": "us-east-1a", "instance_type": "g5.xlarge", "image": "ami-0123456789abcdef0"
    }

    # An AWS-compatible EC2 API (a private region, or a local emulator in tests): the provider
    # then skips the AWS-only account and credential checks.
    endpoint: Annotated[str, matching(
        r"https?://[^\s/]+(/\S*)?", "an http:// or https:// URL such as https://ec2.example.internal"
    )] | None = None


class TencentCloud(_Cloud):
    # Regions of the CVM API (Tencent Cloud API reference, 2025).
    REGIONS = frozenset({
        "ap-bangkok", "ap-beijing", "ap-chengdu", "ap-chongqing", "ap-guangzhou", "ap-hongkong",
        "ap-jakarta", "ap-nanjing", "ap-seoul", "ap-shanghai", "ap-shanghai-fsi",
        "ap-shenzhen-fsi", "ap-singapore", "ap-tokyo", "eu-frankfurt", "na-ashburn",
        "na-siliconvalley", "sa-saopaulo",
    })
    ZONE = r"{region}-[0-9]+"
    INSTANCE_TYPE = r"[A-Z][A-Za-z0-9]*\.[0-9]*[A-Z]+[0-9]*"
    IMAGE = r"img-[a-z0-9]{8}"
    EXAMPLES: ClassVar[dict[str, str]] = {
        "zone": "ap-guangzhou-6", "instance_type": "GN7.2XLARGE32", "image": "img-487zeit5"
    }

    # PREPAID is left out on purpose: a prepaid CVM cannot be destroyed before it expires.
    instance_charge_type: Literal["POSTPAID_BY_HOUR", "SPOTPAID"] = "POSTPAID_BY_HOUR"
    internet_max_bandwidth_out: Annotated[int, Field(ge=1, le=1000)] = 10
    project_id: Annotated[int, Field(ge=0)] = 0


class JDCloud(_Cloud):
    REGIONS = frozenset({"cn-north-1", "cn-east-1", "cn-east-2", "cn-south-1"})
    ZONE = r"{region}[a-z]"
    INSTANCE_TYPE = r"[a-z]+\.[a-z0-9]+\.[a-z0-9]+"
    IMAGE = r"img-[a-z0-9]+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    EXAMPLES: ClassVar[dict[str, str]] = {
        "zone": "cn-north-1a", "instance_type": "g.n2.xlarge", "image": "img-m5s0tb1jgo"
    }

    eip_bandwidth_mbps: Annotated[int, Field(ge=1, le=200)] = 10
    eip_provider: Literal["bgp", "no_bgp"] = "bgp"


CloudSettings = AWSCloud | TencentCloud | JDCloud
CLOUD_MODELS: dict[str, type[_Cloud]] = {
    "aws": AWSCloud, "tencentcloud": TencentCloud, "jdcloud": JDCloud
}
