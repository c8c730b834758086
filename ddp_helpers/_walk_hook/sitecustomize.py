"""Start-up hook of :mod:`ddp_helpers.walk_record`: on PYTHONPATH with WALK_RECORD set, every Python
process of a launch records its first batch and final weights (a folder, not a package)."""
import os

if os.environ.get("WALK_RECORD"):
    from ddp_helpers.walk_record import install

    install(os.environ["WALK_RECORD"])
