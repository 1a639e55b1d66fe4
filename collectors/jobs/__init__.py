"""`placement.py`: host NIC inventory, RDMA device plugin resources, pods -> placement rows, `endpoints` batches
`kube.py`: the Kubernetes API as a job source (kubeconfig, in-cluster service account, client certificates)
`collector.py`: the job sources (pod list file, static jobs), `JobsCollector` polling them
`config.py`: the `collectors.jobs` section
"""
