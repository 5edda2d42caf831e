"""Known answers and their agreement as the API shows them (/profiles, /compare, /experiments)."""

from __future__ import annotations

import time

from daemon.api.schemas import AgreementOut, AgreementRequestOut, AnswerOut, KnownAnswerOut
from daemon.proving.agreement import Agreement
from daemon.proving.known_answer import KnownAnswerView


def agreement_out(profile: str, a: Agreement) -> AgreementOut:
    return AgreementOut(
        profile=profile,
        other=a.other,
        equal=a.equal,
        from_first_token=a.from_first_token,
        requests=[AgreementRequestOut(kind=k, first_difference=f, length=n) for k, f, n in a.requests],
        text=a.describe(),
    )


def known_answer_out(profile: str, v: KnownAnswerView) -> KnownAnswerOut:
    return KnownAnswerOut(
        run_id=v.run_id,
        recorded_at=v.recorded_at,
        age_s=max(0.0, time.time() - v.recorded_at.timestamp()),
        answers=[
            AnswerOut(kind=a.kind, prompt=a.prompt, text=a.text, tokens=len(a.tokens)) for a in v.answers
        ],
        agreement=agreement_out(profile, v.agreement) if v.agreement else None,
    )
