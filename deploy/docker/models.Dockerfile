# A Triton model repository as an image, for the fetch-models init container (deploy/k8s/base/fetch-models.sh),
# which copies /repository into the pod's models volume. The build context is the repository folder:
#   docker build -f deploy/docker/models.Dockerfile -t infergate-models:0.1.0 deploy/local/models
# busybox gives the init container its shell, cp and mv, and nothing else.
FROM busybox:1.36
COPY . /repository/
USER 65532:65532
