"""Datasets in the runs database: one row each (name, source, counts, hash, how output lengths are known)
and their prompts in order. Deleting one deletes its prompts; their text leaves the files (Store.erase)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import delete, insert
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from daemon.core.errors import Busy, NotFound
from daemon.store.models import Dataset, DatasetPrompt
from daemon.store.queries import Store


@dataclass(frozen=True)
class NewPrompt:
    endpoint: str
    body: str  # JSON {"prompt" | "messages", "params"}
    category: str | None
    output_tokens: int | None
    offset_s: float | None


class DatasetStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    def create(self, head: Dataset, prompts: list[NewPrompt]) -> Dataset:
        """The dataset and its prompts in one transaction; Busy when the name is taken."""
        with self.store.session() as s:
            if s.exec(select(Dataset.id).where(Dataset.name == head.name)).first() is not None:
                raise Busy(f"a dataset named {head.name!r} exists: delete it first, or pick another name")
            s.add(head)
            try:
                s.flush()
            except IntegrityError:
                raise Busy(f"a dataset named {head.name!r} exists") from None
            rows = [
                {"dataset_id": head.id, "idx": i, "offset_s": p.offset_s, "endpoint": p.endpoint}
                | {"category": p.category, "body": p.body, "output_tokens": p.output_tokens}
                for i, p in enumerate(prompts)
            ]
            for i in range(0, len(rows), 5000):
                s.execute(insert(DatasetPrompt), rows[i : i + 5000])
            s.commit()
            s.refresh(head)
            return head

    def all(self) -> list[Dataset]:
        with self.store.session() as s:
            return list(s.exec(select(Dataset).order_by(col(Dataset.name))).all())

    def get(self, name: str) -> Dataset:
        with self.store.session() as s:
            row = s.exec(select(Dataset).where(Dataset.name == name)).first()
        if row is None:
            raise NotFound(f"no dataset {name!r} (k25-ctl datasets lists them)")
        return row

    def prompts(self, dataset_id: int) -> list[DatasetPrompt]:
        with self.store.session() as s:
            q = select(DatasetPrompt).where(DatasetPrompt.dataset_id == dataset_id)
            return list(s.exec(q.order_by(col(DatasetPrompt.idx))).all())

    def delete(self, name: str) -> int:
        """Delete the dataset and its prompts, the freed pages overwritten; returns how many prompts."""
        head = self.get(name)
        self.store.erase(
            delete(DatasetPrompt).where(col(DatasetPrompt.dataset_id) == head.id),
            delete(Dataset).where(col(Dataset.id) == head.id),
        )
        return head.prompts


def categories(head: Dataset) -> dict[str, int]:
    data = json.loads(head.categories)
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}
