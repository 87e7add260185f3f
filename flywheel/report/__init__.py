"""`flywheel report`: a demo run as a static HTML page with PNG plots."""

from flywheel.report.html import write_report

__all__ = ["write_report"]
