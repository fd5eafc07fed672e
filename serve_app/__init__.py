"""Ray Serve application: `app` composes the deployments (`ingress`, `embedder`, `writer`,
`scheduler`); `errors`, `middleware`, `auth` and `schemas` are the HTTP edge; `config` its options."""
