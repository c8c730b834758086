"""Pictures drawn by code from real runs, and the widgets that redraw them.

* :mod:`~ddp_helpers.viz.figures` - PNG and widget plumbing every picture shares, drawing primitives;
* :mod:`~ddp_helpers.viz.diagrams` - who runs where: parallelism overview (00), a launch's process tree (03);
* :mod:`~ddp_helpers.viz.timelines` - a DDP step's buckets against backward (04), checkpoints and restarts (05);
* :mod:`~ddp_helpers.viz.ring_widget` - the ring all-reduce stepper (01);
* :mod:`~ddp_helpers.viz.sampler_explorer` - what DistributedSampler hands each rank (02);
* :mod:`~ddp_helpers.viz.dealing` - the sampler as card-dealing: an epoch's order coloured by rank (02);
* :mod:`~ddp_helpers.viz.rank_map` - nodes, processes, ranks, devices and the store of a launch (00);
* :mod:`~ddp_helpers.viz.walkthrough` - the walkthrough's steps as coloured diffs (00);
* :mod:`~ddp_helpers.viz.state_strip` - per walkthrough step, each rank's shard and whether weights agree (00);
* :mod:`~ddp_helpers.viz.accumulation` - gradient accumulation with ``no_sync`` on a step timeline (04);
* :mod:`~ddp_helpers.viz.planner_widget` - the memory and traffic planner (11-14).

Nothing here computes what it shows: the data comes from the topic modules (``ring``,
``samplers``, ``buckets``, ``checkpoint``, ``processes``), the same code the workers run.
Each module imports matplotlib and ipywidgets only inside the functions that draw; importing the
package sets the print-sized text of :data:`~ddp_helpers.viz.figures.STYLE` in matplotlib's rcParams,
so figures a notebook draws with ``plt`` after it imports ``ddp_helpers.viz`` get it too.
"""

from ddp_helpers.viz.figures import use_style

use_style()
