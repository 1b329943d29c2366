"""The price file (`--prices FILE`): what an instance hour of each type costs. Pure: the parsed
JSON or TOML object in, a :class:`PriceList` out; reading the file is the plan step's.

    currency = "USD"
    region = "us-east-1"
    as_of = "2025-06-01"
    source = "https://aws.amazon.com/sagemaker/pricing/"

    [price_per_hour]
    "ml.g5.xlarge" = 1.408
    "local-636e7424" = 2.5   # a slug prices one measured deployment (two local machines)
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pytest_tts_scaling.errors import InputError


class PriceList(BaseModel):
    """Price per instance hour by instance type, and where the numbers came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: str = "USD"
    region: str | None = None
    as_of: str | None = None
    source: str | None = None
    note: str | None = None
    price_per_hour: dict[str, float] = Field(min_length=1)

    @field_validator("price_per_hour")
    @classmethod
    def _positive(cls, prices: dict[str, float]) -> dict[str, float]:
        for kind, price in prices.items():
            if not math.isfinite(price) or price <= 0:
                raise ValueError(f"{kind}: expected a positive price per hour, got {price!r}")
        return prices


def parse_prices(raw: Any, name: str) -> PriceList:
    """The price list in ``raw`` (a parsed file called ``name``); InputError in one line naming
    the field."""
    if not isinstance(raw, dict):
        raise InputError(f"{name}: expected a table of fields, got {type(raw).__name__}")
    try:
        return PriceList.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(part) for part in err["loc"]) or "(top level)"
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "not a price file field (expected currency, region, as_of, source, note, "
            message += "price_per_hour)"
        elif err["type"] == "missing":
            message = "required: a table of instance type = price per instance hour"
        raise InputError(f"{name}: field '{field}': {message}") from None


def price_of(prices: PriceList, instance_type: str, slug: str, name: str) -> float:
    """The price of a measured deployment: by its slug where the file names it (two local
    machines are both instance type `local`), else by its instance type."""
    price = prices.price_per_hour.get(slug, prices.price_per_hour.get(instance_type))
    if price is None:
        raise InputError(
            f"{name}: field 'price_per_hour': no price for {instance_type!r} (slug {slug!r}), "
            "which a qmax artifact measured; expected its instance type or slug priced "
            f"(has {', '.join(sorted(prices.price_per_hour))})"
        )
    return price
