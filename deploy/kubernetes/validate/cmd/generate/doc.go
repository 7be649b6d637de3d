// Command generate writes the manifests of deploy/kubernetes and the Helm
// chart's files that are made from other files of the repository (see
// package validate). go generate
// runs it from deploy/kubernetes/validate.
package main
