"""What a resource's card counts, kept per resource: its purchases and its ratings.

The rows are written by the database alone: triggers on `accesses` and `reviews` (migration 0006)
adjust them on every insert, update and delete, whoever makes it (the API, the back office, the
loader, the importer, an operator's SQL), so that a search page reads them instead of counting
those tables. The application never writes them: a second writer would count twice.

- `purchases`: accesses whose source is a purchase and that are not revoked.
- `rating_sum`, `rating_count`: the sum and the number of the resource's reviews. The average is
  derived from them at read time (`rating_average`), so that it stays exact.

A resource has no row until something of its own is counted; no row reads as zeros.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Integer, SQLColumnExpression
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from marketplace.models.base import Base


class ResourceCounts(Base):
    __tablename__ = "resource_counts"

    resource_id: Mapped[int] = mapped_column(
        ForeignKey("resources.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    purchases: Mapped[int] = mapped_column(Integer, default=0, server_default="0", nullable=False)
    rating_sum: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0", nullable=False)
    rating_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0", nullable=False)


class rating_average(FunctionElement[Any]):
    """`rating_sum / rating_count`, computed as each database's `avg()` of the reviews computes it,
    so that the average printed (rounded to 2 places) is the one a count over the reviews gives:
    PostgreSQL divides the sum by the count as numerics, SQLite as doubles. Null when nothing is
    counted, as `avg()` of no rows."""

    name = "rating_average"
    inherit_cache = True

    def __init__(self, rating_sum: SQLColumnExpression[int], rating_count: SQLColumnExpression[int]) -> None:
        super().__init__(rating_sum, rating_count)


@compiles(rating_average, "postgresql")
def _rating_average_postgresql(element: rating_average, compiler: SQLCompiler, **kw: Any) -> str:
    rating_sum, rating_count = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"CAST({rating_sum} AS NUMERIC) / NULLIF({rating_count}, 0)"


@compiles(rating_average)
def _rating_average_sqlite(element: rating_average, compiler: SQLCompiler, **kw: Any) -> str:
    rating_sum, rating_count = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"CAST({rating_sum} AS REAL) / NULLIF({rating_count}, 0)"
