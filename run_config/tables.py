"""Every family's table, validated whatever the algorithm: a bad value is an error even in a
table the chosen algorithm does not read, so it is found now and not in a later run."""

from __future__ import annotations

from run_config.common import RunSettings
from run_config.feddr import feddr_settings
from run_config.fedfun import fedfun_settings
from run_config.fedfw import fedfw_settings
from run_config.ffgb import ffgb_settings

FAMILY_TABLES = (fedfw_settings, feddr_settings, ffgb_settings, fedfun_settings)


def validate_tables(settings: RunSettings) -> None:
    """Parse every family table; ConfigError names the first bad key."""
    for parse in FAMILY_TABLES:
        parse(settings)
