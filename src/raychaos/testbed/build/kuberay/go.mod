// The build module for the test bed's KubeRay operator: ray-operator at one release (its
// go.mod has no replace directives; its main package is the module's root).
module raychaos.local/testbed/kuberay

go 1.26

require github.com/ray-project/kuberay/ray-operator v1.5.0
