"""The claims table and the causal chain (the intro): the paper's claims and their replication status, derived from
the committed results by reading every study. It sits on top: it imports studies, nothing imports it but pages."""
