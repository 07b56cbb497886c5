"""The intro's status sentence counts every status of lib.claims.table."""
from lib.claims import counts as claim_counts, table as claims


def test_every_status_is_counted_and_the_counts_add_up():
    rows = claims.status_table()
    c = claim_counts.counts(rows)
    assert sum(c.values()) == len(rows)
    s = claim_counts.sentence(rows)
    for status, n in c.items():
        assert f"{n} {'is' if n == 1 else 'are'} " in s
    assert len(s.split(" and ")) >= 2 or len(c) == 1


def test_sentence_order_and_grammar():
    rows = ([{"status": "not reproduced"}] + [{"status": "reproduced"}] * 2 + [{"status": "partly"}]
            + [{"status": "weird"}])
    assert claim_counts.sentence(rows) == ("2 are reproduced, 1 is partly reproduced, 1 is not reproduced and "
                                           "1 is 'weird'")
    assert claim_counts.sentence([]) == "none has been judged yet"


def test_a_remedy_claim_cites_only_the_results_that_hold_its_arms():
    """Each channel or remedy claim's evidence reads only its own arms (`CLAIM_ARMS`), so its sources are the chain
    comparison and the results holding those arms — not every remedy result (the precision dial, for one, tests no
    such claim)."""
    from lib.book import registry
    from lib.studies.gpt2 import remedies
    rows = {r["id"]: r for r in claims.status_table()}
    remedy_results = {n for g in remedies.REMEDY_GROUPS for n in registry.GROUPS[g]}
    cited_any = False
    for cid, arms in remedies.CLAIM_ARMS.items():
        cited = set(rows[cid]["results"]) & remedy_results
        for name in cited:
            labels = {a["label"] for a in registry.resolve(name, "full")["arms"]}
            assert labels & set(arms), (cid, name)
        cited_any |= bool(cited)
    assert cited_any            # the committed tree holds remedy results: the check above ran
