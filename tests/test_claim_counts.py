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
