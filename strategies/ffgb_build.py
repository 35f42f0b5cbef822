"""Which FFGB strategy a run config asks for: the multi-round one, or FFGB.L in one shot."""

from __future__ import annotations

from run_config.common import RunSettings
from run_config.ffgb import check_task, ffgb_settings
from strategies.ffgb import FFGBStrategy
from strategies.ffgb_one_shot import FFGBLOneShotStrategy
from tasks.federation import task_for


def build_ffgb(settings: RunSettings) -> FFGBStrategy:
    """FFGB, FFGB.C or FFGB.L (``algorithm``) from the ``ffgb.*`` table."""
    ffgb = ffgb_settings(settings)
    task = task_for(settings.data)
    check_task(ffgb, task)
    args = (ffgb, task, settings.central_evaluation, settings.fraction_train, settings.seed)
    if ffgb.one_shot:
        return FFGBLOneShotStrategy(*args, num_rounds=settings.num_rounds)
    return FFGBStrategy(*args)
