"""Where live DCGM telemetry comes from, as Dagster resources: one interface, two implementations.

- `DcgmScrapeResource` (live): scrapes the dcgm-exporter targets of the `dcgm` section of the
  connector config (gpupool.yml), read at every round so that edits apply at the next tick.
- `ExpositionFolderResource` (offline): every exposition file of a folder is one "target", read
  as if it had just been scraped; for tests and for replaying captured scrapes.
"""

from __future__ import annotations

import abc
import datetime as dt

import dagster as dg
from pydantic import Field

from pipelines.config import config_file_field, config_path, section
from pipelines.connectors.scrape import DcgmConfig, ScrapeRound, assemble_round, read_folder, shared_scraper


class TelemetrySource(dg.ConfigurableResource, abc.ABC):
    """A source of DCGM scrape rounds: `scrape_round(round_at)` fetches every target once."""

    @abc.abstractmethod
    def scrape_round(self, round_at: dt.datetime) -> ScrapeRound: ...

    @abc.abstractmethod
    def describe(self) -> str: ...


class DcgmScrapeResource(TelemetrySource):
    """Live: HTTP scraping of the configured dcgm-exporter targets.

    `config_file` defaults to $GPUPOOL_CONFIG, else ./gpupool.yml; without a `dcgm` section a
    round has no targets.
    """

    config_file: str = config_file_field()

    def settings(self) -> DcgmConfig | None:
        return section("dcgm", DcgmConfig, config_path(self.config_file))

    def scrape_round(self, round_at: dt.datetime) -> ScrapeRound:
        settings = self.settings()
        if settings is None:
            return assemble_round([], round_at)
        return shared_scraper(settings).scrape_round(round_at)

    def describe(self) -> str:
        settings = self.settings()
        if settings is None:
            return "no dcgm section in the connector config"
        return f"{len(settings.targets)} targets and {len(settings.file_sd)} file_sd files"


class ExpositionFolderResource(TelemetrySource):
    """Offline: the exposition files (*.prom, *.txt, *.metrics) of `folder`, one target each."""

    folder: str = Field(description="The folder of exposition files (*.prom, *.txt, *.metrics), one target each.")

    def scrape_round(self, round_at: dt.datetime) -> ScrapeRound:
        return assemble_round(read_folder(self.folder), round_at)

    def describe(self) -> str:
        return f"exposition files in {self.folder}"
