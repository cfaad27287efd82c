"""kmod: the bunshin_cow copy-on-write kernel module (C sources here) and its VM test harness.

Owns building the module against an installed kernel's headers and testing it inside a qemu
guest (``kmod.harness``). Does not own using the module from Python on a real machine: that is
forkcore's ``kmod`` memory backend, which only opens /dev/bunshin_cow. Importing this package
starts nothing.
"""

__all__ = ["harness"]
