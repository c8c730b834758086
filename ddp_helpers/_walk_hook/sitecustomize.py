"""Start-up hook of the recorders that watch a launch from outside its scripts (a folder, not a package).

On PYTHONPATH, every Python process of a launch imports it: with WALK_RECORD set it records for
:mod:`ddp_helpers.walk_record` (first batch, final weights); with DDP_DOCTOR_RECORD set, each rank
(RANK is set; torchrun's own agent has none) records for :mod:`ddp_helpers.doctor` what the script did.
"""
import os

if os.environ.get("WALK_RECORD"):
    from ddp_helpers.walk_record import install

    install(os.environ["WALK_RECORD"])

if os.environ.get("DDP_DOCTOR_RECORD") and "RANK" in os.environ:
    from ddp_helpers.doctor.recorder import install as install_doctor

    install_doctor(os.environ["DDP_DOCTOR_RECORD"], os.environ["DDP_DOCTOR_SCRIPT"])
