"""Ray Serve deployments: FastAPI ingress, embedder, recall, writer, scheduler."""
