"""nbval settings for the series: stderr (warnings, torchrun's agent log) is not compared."""


def pytest_collectstart(collector):
    if getattr(collector, "fspath", None) is not None and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)
