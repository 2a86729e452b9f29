"""The inventory: one YAML file validated once into typed objects (the single source of truth)."""

from installer.inventory.loader import load_inventory
from installer.inventory.models import (
    Engine,
    Host,
    Inventory,
    Model,
    Ports,
    ReleaseSettings,
    ServedModel,
    SSHSettings,
)

__all__ = [
    "Engine", "Host", "Inventory", "Model", "Ports", "ReleaseSettings", "SSHSettings", "ServedModel",
    "load_inventory",
]
