"""The inventory: one YAML file validated once into typed objects (the single source of truth)."""

from installer.inventory.engine import Engine
from installer.inventory.gateway import Ports
from installer.inventory.hosts import Host, SSHSettings
from installer.inventory.loader import load_inventory
from installer.inventory.models import Inventory
from installer.inventory.release import ReleaseSettings
from installer.inventory.served import Model, ServedModel

__all__ = [
    "Engine", "Host", "Inventory", "Model", "Ports", "ReleaseSettings", "SSHSettings", "ServedModel",
    "load_inventory",
]
