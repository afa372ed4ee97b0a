"""Single sign-on with OpenID Connect: the authorization code flow with PKCE against one provider
(Keycloak, Microsoft Entra ID, Google...), accounts made at first sign-in and roles from a groups claim.

config: the settings and the provider's discovery document; backend: the tokens' checks; accounts:
claims to a user; views: the sign-in's two ends. mozilla-django-oidc makes the request and the code
exchange; what it leaves out (the ID token's issuer and audience, refusals a person can read) is here.
"""
