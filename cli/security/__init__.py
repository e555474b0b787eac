"""A deployment's security: who may connect to the bus, and what each identity may do there.

`members` is the list of identities the server accepts (a public nkey per identity, with its role,
expiry and revocation), `deployment.Security` issues local credentials from it; the server config
is generated from the members and the roles table, so the file on disk is the whole policy.
"""
