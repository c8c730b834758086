"""Performance measurements of notebook 10, and the benchmark command ``python -m ddp_helpers.perf``.

    python -m ddp_helpers.perf            # table + JSON; a few minutes on 2 idle cores
    python -m ddp_helpers.perf --suite    # also the wall time of strict nbval over the series (slow)

The modules, each importing only those above it (nothing is imported here, so that
``import ddp_helpers.perf.timing`` stays light):

* :mod:`~ddp_helpers.perf.timing`: the clock (:func:`elapsed`, which synchronizes CUDA), spreads
  and the "measurable difference" rule, the alpha-beta arithmetic (:func:`message_sizes`,
  :func:`fit_latency_bandwidth`, :func:`alpha_beta`, ...), and the building blocks that time code
  inside a process group (:func:`time_collective`, :func:`compare_collectives`);
* :mod:`~ddp_helpers.perf.experiments`: notebook 10's experiments inside a process group
  (:func:`allreduce_sweep`, :func:`ring_vs_gloo`, :func:`step_controls`, ...) and the one
  training step every experiment takes (:func:`train_step`);
* :mod:`~ddp_helpers.perf.hooks`: DDP communication hooks, their bytes, losses and costs;
* :mod:`~ddp_helpers.perf.compile_ddp`: what ``torch.compile`` captures around DDP;
* :mod:`~ddp_helpers.perf.cli`: the command (:func:`run_bench`, :func:`run_suite`, the worker
  that torchrun starts, the tables); ``__main__`` runs it.

The model of every experiment is :func:`ddp_helpers.models.square_mlp` with ``seed=0``.
"""
