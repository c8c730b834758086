"""Helpers shared by the DDP notebook series and its worker scripts."""

from ddp_helpers.launch import LaunchError, LaunchResult, LaunchStopped, LaunchTimeout, WorkerFailed, torchrun

__all__ = ["torchrun", "LaunchResult", "LaunchError", "LaunchStopped", "LaunchTimeout", "WorkerFailed"]
