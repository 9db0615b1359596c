"""A gold set's tenant scope and the inbox posts counted since the promoted version."""

from __future__ import annotations

from retrieval_assets.core.evaluation.gate import GateSettings, decide
from retrieval_assets.core.evaluation.scope import Post, gold_scope, posted_by, posted_since


def test_the_scope_is_the_catalogs_tenants_never_one_known_only_from_its_posts() -> None:
    scope = gold_scope(
        ["default", "papers"],
        # A catalog row naming its own tenant joins; a judged id that only a hostile post holds does not.
        judged_tenants={"d1": "default", "d2": "acme", "d3": "mallory"},
        posted={"d3": {"mallory"}, "d1": {"mallory"}},
        generated_tenants={"d4": "beta"},
    )
    assert scope.tenants == ("acme", "beta", "default", "papers")
    assert scope.why["acme"] == "judged documents" and scope.why["beta"] == "generated gold"
    assert gold_scope(["default"]).label == "tenant default"
    assert scope.label == "tenants acme, beta, default, papers"


def test_posts_since_the_promoted_version_are_those_it_does_not_hold() -> None:
    posts = [
        Post("alpha", "k1", "upsert", "v-promoted", "2026-01-01T00:00:02"),  # in the promoted version
        Post("alpha", "k1", "upsert", "v-old", "2026-01-01T00:00:00"),  # before it
        Post("alpha", "k1", "upsert", "v-refused", "2026-01-01T00:00:05"),  # a refused candidate since
        Post("beta", "k2", "delete", "v-candidate", "2026-01-01T00:00:09"),
        Post("beta", "k2", "upsert", "v-later", "2026-01-01T00:00:12"),  # after the candidate
        Post("beta", "k2", "upsert", None, None),  # pending
    ]
    counted = posted_since(
        posts,
        promoted="v-promoted",
        promoted_sealed_at="2026-01-01T00:00:01",
        candidate="v-candidate",
        candidate_sealed_at="2026-01-01T00:00:08",
    )
    assert counted == {("alpha", "k1", "upsert"): 1, ("beta", "k2", "delete"): 1}
    assert posted_by(counted, {"beta"}) == 1
    sealed = "2026-01-01T00:00:08"
    everything = posted_since(posts, promoted=None, promoted_sealed_at=None, candidate="v-candidate",
                              candidate_sealed_at=sealed)
    assert sum(everything.values()) == 4


def test_a_refusal_names_the_gold_and_its_tenant() -> None:
    good = {"ndcg@10": 0.93, "recall@100": 0.95, "p95_ms": 20.0}
    decision = decide({**good, "ndcg@10": 0.91}, good, GateSettings(), gold="gold of tenant alpha")
    assert not decision.passed
    assert decision.reasons == ["gold of tenant alpha: ndcg@10 0.9100 fell more than 0.0100 below the promoted 0.9300"]
